"""Queryable state, the protocol both ends speak: the query messages and their wire format
(``wire``) and connections over a local socket (``local``). The server a dataflow worker runs,
its pure machine, the committed views and the native answer path are the dataflow kind's
(:mod:`epochal.dataflow.queries`); the clients are the REST API's and the command line's
(docs/queryable_state.md)."""
