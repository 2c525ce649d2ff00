"""Data: read LeRobot datasets, pack cameras into layouts, and write prepared clip datasets."""
