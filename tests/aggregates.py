"""A user AggregateFunction the window tests share (integration and chaos)."""

from __future__ import annotations


class Span:
    """A user AggregateFunction whose accumulator ``[first, last, count]`` changes in place: a
    window's first and last index and its size identify exactly which records it held."""

    def create_accumulator(self):
        return [None, None, 0]

    def add(self, record, accumulator):
        if accumulator[0] is None:
            accumulator[0] = record[1]
        accumulator[1] = record[1]
        accumulator[2] += 1
        return accumulator

    def merge(self, a, b):
        return [a[0], b[1], a[2] + b[2]]

    def get_result(self, accumulator):
        return tuple(accumulator)
