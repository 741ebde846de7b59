"""Running the stack's jobs: the side-by-side runner of the default job, and the dashboard."""
