"""The benchmark behind bin/benchmark.py (its entry point): __main__.py reads
the arguments and runs the sections named in its table, stack.py makes the
throwaway stack (a folder, a RabbitMQ node, a redis-server, a PostgreSQL
cluster) as context managers that always clean up, sections.py measures.
Importing any of it starts nothing; sections.py may be imported only after
django.setup() (its main does that inside the stack)."""
