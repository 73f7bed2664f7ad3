# Move only: the module is now tickets/services/registrations.py; the next
# commit splits it by noun and points every caller at its module.
from tickets.services.registrations import *  # noqa: F403
from tickets.services.registrations import _park, _plan, _same_submission  # noqa: F401
