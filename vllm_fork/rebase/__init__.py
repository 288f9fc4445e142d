"""Moving the patch queue to a newer upstream release: target, classify, report, finish."""
