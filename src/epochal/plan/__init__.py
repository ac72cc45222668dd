"""Planning on the driver: logical graph -> chained job graph -> execution graph on workers."""
