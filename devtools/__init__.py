"""Tools shared by the test suite (tests/) and the scripts in bin/: free
loopback ports (ports.py), network namespaces (netns.py), a gunicorn starter
(web.py). Nothing of the product imports this package (checked by
tests/test_import_contract.py); it imports nothing of the product."""
