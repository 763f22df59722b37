# The compute environments run in an existing VPC (var.vpc_id, var.subnet_ids). One security group:
# all egress (ECR, CloudWatch, W&B), and all traffic between its own members so the nodes of a
# multi-node job reach each other (torchrun's store, NCCL/gloo). The self rule has no description: moto
# (the local endpoint of the tests) drops it and a second plan would then never be empty.
resource "aws_security_group" "batch" {
  name        = "${var.name_prefix}-batch"
  description = "CleanRL AWS Batch instances"
  vpc_id      = var.vpc_id
}

resource "aws_vpc_security_group_egress_rule" "all" {
  security_group_id = aws_security_group.batch.id
  description       = "all egress"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_ingress_rule" "self" {
  security_group_id            = aws_security_group.batch.id
  ip_protocol                  = "-1"
  referenced_security_group_id = aws_security_group.batch.id
}
