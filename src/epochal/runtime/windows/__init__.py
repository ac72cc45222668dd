"""Windows: shapes and assigners, time, count and session windows, triggers, window state and
contexts, and joins (interval and window joins), whose buffers are time-bucketed keyed state."""
