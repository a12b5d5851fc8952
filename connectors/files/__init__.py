"""Files and the table formats over files, read into Arrow: Parquet and CSV with pyarrow
(FileSource), Delta Lake with delta-rs (DeltaSource) and Iceberg with pyiceberg
(IcebergSource), and the Flink option tables of the ``filesystem`` and ``delta``
connectors."""
