"""On-demand performance benchmarks of pymlirjit against its baselines.

Run ``python -m benchmarks`` (``--quick`` for a smoke test with tiny sizes). Not part of
the test suite; see docs/performance.md.
"""
