"""What every layer may use and nothing of the project underneath: the errors steps raise (named for
Step Functions), the clock, the execution settings the flows share, and kernel receive stamps."""
