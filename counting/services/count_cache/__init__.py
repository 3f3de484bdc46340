"""The Redis count cache (CCACHE-1 … CCACHE-4): `layers` (the generation registry mirror, the writes of
the view and bucket layers, loss detection) and `rebuild` (a whole generation from the durable
vbuckets, on the one generation lifecycle). The durable store is the truth and is only read here."""
