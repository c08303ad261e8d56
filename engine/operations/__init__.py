"""One module per operation; which class runs which operation is the operation table's
(engine/operation_specs.py: `Operation.implementation_class()`)."""
