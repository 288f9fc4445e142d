"""The invoke tasks, one module per task group; tasks.py only assembles the collection."""
