"""Count projection models (bucket spaces, generations, manifests, vbuckets, receipts) arrive with the
event-propagation issue; the app exists now so the alias families and routers are in place."""
