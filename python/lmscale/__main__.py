"""``python -m lmscale``: prints what the lmscale build that this package finds holds."""
from . import build_info


def main() -> None:
    info = build_info()
    width = max(len(k) for k in info)
    for key, value in info.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
