"""Commands in pipes: when the reader goes away (`status | head -3`), a
command exits quietly with 141, as `ls | head` does — no BrokenPipeError
traceback. One mechanism in manage.py serves every command."""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tickets.models import DeliveryFailure
from tickets.services.registrations import register_guest

pytestmark = [pytest.mark.broker, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    "command",
    [["status"], ["audit"], ["parked"], ["reconcile", "--older-than", "3600"], ["worker", "--drain"], ["help"]],
    ids=lambda command: command[0],
)
def test_a_command_whose_reader_went_away_exits_quietly(worker_env, command):
    for number in range(3):
        register_guest(name=f"Piped Guest {number}")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes its first line
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *command],
            env=worker_env,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert result.returncode == 141, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    # A worker whose output went nowhere recorded no failure for it and gave its delivery back.
    assert not DeliveryFailure.objects.exists()
