"""Programs that use spark-lookup as a user does; not part of the library."""
