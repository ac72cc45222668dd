"""The worker host every job kind shares: the shell around a kind's worker machine, the control link and
registration, the peer mesh, heartbeats, hooks, reports, the memory limit and the Spark entry point."""
