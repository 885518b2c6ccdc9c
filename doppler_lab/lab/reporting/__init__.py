"""What people read: the notebook runs (papermill), the report site and the demo job."""
