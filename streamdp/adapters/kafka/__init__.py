"""The Kafka service: ``streamdp run`` (consume → engine → publish, crash-safe through Redis checkpoints) and
``streamdp replay`` (a JSONL file or the demo data into a topic). See ``deploy/OPERATIONS.md``."""
