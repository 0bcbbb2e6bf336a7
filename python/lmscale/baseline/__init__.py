"""PyTorch baselines of lmscale's benchmarks, each one readable page that needs only torch (not
lmscale's C++ library): ``python -m lmscale.baseline.e2e`` is the end-to-end baseline that
``lmscale bench --compare`` runs."""
