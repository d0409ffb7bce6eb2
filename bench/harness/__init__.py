"""Real job processes on fresh topics, and what they read: shared by the benchmarks and the tests.

jobs.py      a job as a real child process (`JobProcess`), the producer of decisions and what was
             sent (`Producer`, `Truth`), the sinks' counts, waiting on a condition
fraud_rt.py  the fraud job in real-time mode, fed at a fixed rate, killed and restarted
dashboard.py the dashboard served by `streamlit run` on a free port, and the Chromium that opens it

Not a scenario: `python -m bench` runs the modules of `bench/`, never its packages.
"""
