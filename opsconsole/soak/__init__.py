"""The seeded fault soak (issue 33 §1, `manage.py soak`): `schedule` draws the fault windows and the clients'
decisions from the seed, `traffic` runs spec TEST-2's four groups over HTTP through the Python client, `history`
records every exchange, `faults` injects (the drills' injectors, and a hanging store), `checker` judges the history
and the stores after the heal, `runner` runs one soak."""
