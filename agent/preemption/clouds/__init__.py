"""One module per cloud: pure parsers for its metadata bodies, its ``Provider`` and its declaration
(``agent.preemption.registry.declare``). Every module here is a cloud; the registry finds them by
walking this package."""
