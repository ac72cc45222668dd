"""The dataflow data plane: channels with credit-based flow control, subtasks and operator chains,
source readers, the wiring of one worker's subtasks, and the path batches take through them."""
