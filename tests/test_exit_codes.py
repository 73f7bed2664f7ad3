"""One exit-code mapping for every command (nightjar_delivery/exits.py): the domain's
refusals 1, wrong use 2, the broker 3; the tickets and lab errors are kinds
of the engine's, so each command needs no ladder of its own."""

import pytest
from django.core.management.base import CommandError

from nightjar_delivery import exits, transport
from tickets import handlers
from tickets.services.registrations import UnknownRegistration
from tickets.services.repair import RepairRefused

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (UnknownRegistration("There is no registration R-0099."), 1, "There is no registration R-0099."),
        (RepairRefused("Nothing to repair."), 1, "Nothing to repair."),
        (handlers.LabModeOff("Lab mode is off."), 2, "Lab mode is off."),
        (handlers.HandlerError("lab/handler.py, line 3: invalid syntax"), 2, "lab/handler.py, line 3: invalid syntax"),
        (transport.BrokerError("RabbitMQ is unavailable."), 3, "Stopped: RabbitMQ is unavailable."),
    ],
)
def test_each_kind_of_error_exits_with_its_status(error, status, message):
    with pytest.raises(CommandError) as raised, exits.exit_codes():
        raise error
    assert (raised.value.returncode, str(raised.value)) == (status, message)


def test_the_broker_sentence_keeps_the_commands_own_prefix():
    with pytest.raises(CommandError) as raised, exits.exit_codes(broker="Not published: "):
        raise transport.BrokerError("RabbitMQ is unavailable.")
    assert str(raised.value) == "Not published: RabbitMQ is unavailable."


def test_any_other_error_is_not_turned_into_an_exit_status():
    with pytest.raises(KeyError), exits.exit_codes():
        raise KeyError("a bug, not a refusal")
