"""The dataflow data plane: channels with credit-based flow control, subtasks and operator chains,
the wiring of one worker's subtasks, and the path batches take through them. (How a worker reads
a source's splits is every kind's: :mod:`epochal.connectors.source_reader`.)"""
