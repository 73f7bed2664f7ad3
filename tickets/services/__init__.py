"""Every state change in Nightjar, as plain functions named after what staff
would say, one module per noun (pretix's base/services/ style). Views, the
admin and management commands all call these; none of them changes rows on
its own. Each guards first (raising registrations.NightjarError with a
sentence a person understands), then changes rows in one atomic block, and
publishes only after the commit.

- registrations: register_guest, retry_registration, find_registration,
  publish_registration, and the state queries (pending_registrations, ...)
- staff: the trace of staff changes (record_staff_action; who: nightjar_delivery.actor)
- repair: plan_repair, repair_registration
- reconcile: reconcile_registrations, collect_dead_letters, requeue_parked,
  discard_parked (the engine's nightjar_delivery/reconcile.py on the registrations channel)
- status: registration_states, delivery_status, desk_gauges (health: nightjar_delivery/health.py)
- demo: seed_demo, reset_demo (the lab's data)
- audit: audit_invariants
- workers, history, activity: what the desk reads

Import the module you need (`from tickets.services import registrations`);
this package re-exports nothing.
"""
