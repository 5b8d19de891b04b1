"""The report page: the run as a picture (``report --html``, ``/report``)."""
