"""Query kinds the engine can release at window close (each a :class:`~streamdp.engine.query.WindowQuery`)."""
