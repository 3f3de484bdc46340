"""The reverse "who liked" index (REV-1 … REV-4, REV-10): `projector` (the consumer), `rebuild` (a new
generation through the one lifecycle), `retire` (rows of deleted videos). The reads are
`counting.selectors.likers`."""
