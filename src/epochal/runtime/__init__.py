"""The worker side: mailbox loop, subtasks, channels with flow control, operators, wire protocol."""
