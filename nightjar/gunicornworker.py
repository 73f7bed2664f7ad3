"""gunicorn's sync worker, woken alone for a new connection.

Every idle sync worker waits for the shared listening socket in select(),
and Linux wakes them all for each connection: one accepts it, the others
run a turn of their loop for nothing (accept fails with EAGAIN) and sleep
again. With 5 workers on 2 cores, those turns cost each POST ~200 µs of
CPU on top of gunicorn's own ~360 µs (a trivial app; issue 43). Here each
worker waits in an epoll of its own with the listener registered
EPOLLEXCLUSIVE, so the kernel wakes one idle worker per connection. Nothing
else changes: the same queue of connections, the same heartbeat (the wait
still ends after `timeout`), the same wake-up pipe for signals; a worker that
dies holds nothing. gunicorn.conf.py uses it where epoll has the flag (Linux)."""

import os
import select

from gunicorn.workers import sync


class SyncWorker(sync.SyncWorker):
    _poller = None

    def wait(self, timeout):
        if self._poller is None:
            # After the fork: each worker has a poller of its own.
            self._poller = select.epoll()
            self._waited = {}
            for waited in self.wait_fds:
                fd = waited if isinstance(waited, int) else waited.fileno()
                exclusive = select.EPOLLEXCLUSIVE if fd != self.PIPE[0] else 0
                self._poller.register(fd, select.EPOLLIN | exclusive)
                self._waited[fd] = waited
        self.notify()
        events = self._poller.poll(timeout)
        if any(fd == self.PIPE[0] for fd, _ in events):
            os.read(self.PIPE[0], 1)
        return [self._waited[fd] for fd, _ in events if fd in self._waited]
