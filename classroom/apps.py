from django.apps import AppConfig


class ClassroomConfig(AppConfig):
    """The learner's exercise: `lab start/check/reset`, `verify_handler` and
    the grading (classroom/lab.py, classroom/verify.py). It uses tickets and
    the engine; nothing imports it."""

    name = "classroom"
    verbose_name = "Nightjar classroom"
