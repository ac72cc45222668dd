"""Operators: the code that runs inside subtasks, one batch at a time, and what they exchange besides
records (in-band events); process functions, timers, two-input operators, async I/O, loops."""
