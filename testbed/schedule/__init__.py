"""Pure scheduling, shared by the controller and the testbed: Crux's path
selection, priorities and compression (crux/) and where the controller
puts each announced connection (placement.py). It imports only the pure
fabric model, so `hpnlab crux plan` calls the controller's own code
directly and the controller imports it without the testbed's machinery."""
