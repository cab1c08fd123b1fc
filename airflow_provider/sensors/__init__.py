"""``ZerobusReadbackSensor``: wait for Iceberg to show delivered rows."""
