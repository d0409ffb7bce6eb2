"""What the tests share: the browser and Streamlit runners, the seeded store, the job processes."""
