"""The full cache: one immutable indexed snapshot of a whole table (its key index, its
columns spooled and combined while loading), an overlay of changed keys in front of it,
and the snapshot store through which the processes of a host can share it."""
