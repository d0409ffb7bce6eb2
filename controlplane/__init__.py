"""CardStream's control plane: the state every part shares, beside `infra/`.

The store (schema, migrations, transactions), the command table, fencing leases and epochs, the
one clock, and the fault catalogue. The simulator, the Spark jobs, the supervisor and the
dashboard all read and write it; it imports none of them, so data flows one way (simulator ->
pipelines -> dashboard) while every part can still take commands.
"""
