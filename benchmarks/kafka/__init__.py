"""Kafka in and out: epochal's KafkaSource -> parse -> keyed running count -> KafkaSink, measured
against a real local broker (see ``__main__``)."""
