"""CardStream's transaction simulator: `python -m simulator` (see __main__.py for the options).

population.py  cards and merchants (seeded);     patterns.py  amounts, fraud patterns, malformed messages
stream.py      the seeded stream in send order;  producer.py  bulk, idempotent kafka-python producer
control.py     commands from the store's command table; runner.py  pacing, stamping, progress, SIGTERM flush and totals
(Kafka's key -> partition, batched, is infra/partitioner.py; the contract's rules, infra/contracts.py.)
"""
