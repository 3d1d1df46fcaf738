DROP INDEX IF EXISTS "river_job_absorbable";
