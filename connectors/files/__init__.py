"""Files and the table formats over files: Parquet and CSV (FileSource), Delta Lake
(DeltaSource) and Iceberg (IcebergSource), read with pyarrow."""
