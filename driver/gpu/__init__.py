"""The GPU side of the driver: the device API's records, kernel compilation, device handles, GPU memory as regions."""
