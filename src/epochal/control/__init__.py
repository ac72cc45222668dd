"""The driver side: JobMaster, Spark session and launcher, job client."""
