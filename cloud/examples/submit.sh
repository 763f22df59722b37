# Submit and follow jobs with the plain AWS CLI (cloud/submit.py does the same and more).
set -euo pipefail
# The commands of the CleanRL distributed-training articles, as typed there: one PPO run on Pong (cleanrl-ppo picks
# ppo_atari.py for an Atari id), then the jobs of the queue that are running now.
aws batch submit-job --job-name cleanrl-ppo-experiment --job-queue cleanrl-queue --job-definition cleanrl-ppo:1 --parameters envId=PongNoFrameskip-v4,totalTimesteps=50000000
aws batch describe-jobs --jobs $(aws batch list-jobs --job-queue cleanrl-queue --job-status RUNNING --query 'jobSummaryList[*].jobId' --output text)
# One run: the parameters fill Ref::envId, Ref::totalTimesteps, Ref::seed (and Ref::script) of the job definition.
JOB_ID=$(aws batch submit-job --job-name cleanrl-ppo-CartPole-v1-s1 --job-queue cleanrl-cpu-spot --job-definition cleanrl-single \
  --parameters envId=CartPole-v1,totalTimesteps=500000,seed=1 --query jobId --output text)
# Ten seeds (1..10) in one array job: child i runs seed 1 + i.
ARRAY_ID=$(aws batch submit-job --job-name cleanrl-ppo-Acrobot-v1-s1-10 --job-queue cleanrl-cpu-spot --job-definition cleanrl-single \
  --array-properties size=10 --parameters envId=Acrobot-v1,totalTimesteps=500000,seed=1 --query jobId --output text)
aws batch describe-jobs --jobs "$JOB_ID" "$ARRAY_ID" --query 'jobs[].[jobId,jobName,status]' --output text
aws batch list-jobs --job-queue cleanrl-cpu-spot --job-status SUCCEEDED --query 'jobSummaryList[].[jobId,jobName]' --output text
aws batch terminate-job --job-id "$JOB_ID" --reason "stopped by hand"
