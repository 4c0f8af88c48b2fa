"""The energy app's enumerations."""

from django.db import models


class PueBasis(models.TextChoices):
    """Where a PUE period's value comes from."""

    MEASURED = "measured", "Measured"
    ASSUMED = "assumed", "Assumed"


class ReportDeliveryStatus(models.TextChoices):
    """A monthly report email's run record (EnergyReportDelivery.status)."""

    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class ExportStatus(models.TextChoices):
    """An export's run record (EnergyExport.status)."""

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ExportKind(models.TextChoices):
    """What an export builds (EnergyExport.kind)."""

    DAILY_CSV = "daily_csv", "Daily CSV"
    REPORT_PDF = "report_pdf", "Report PDF"
