"""The patch queue: the series, patch files, applying, exporting, checking and reporting on it."""
