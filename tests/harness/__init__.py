"""What the tests share: the browser and Streamlit runners and the seeded store (the job processes,
which the benchmarks share too, are bench/harness)."""
