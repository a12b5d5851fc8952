"""The full cache: one immutable indexed snapshot of a whole table, shared by the processes of
a host through a snapshot store."""
