from django.db import models


class Visit(models.Model):
    """One row per run of `record_visit`: the effect the demo (and the chaos
    soak) counts. No unique constraint on purpose: a task that ran twice
    shows up as two rows with one label."""

    label = models.CharField(max_length=100)
    recorded = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.label
