"""The pure fabric: the model, its builders and units, the paths through it,
and the checking of topology and scenario files. No root, no network, no
processes; every other part of hpnlab imports from here and nothing here
imports from them."""
