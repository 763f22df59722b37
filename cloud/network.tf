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

# Multi-node parallel jobs run in the awsvpc network mode: each node's container has a network interface of its own
# in the subnet, which gets no public IP. In a public subnet such a container reaches nothing outside the VPC, so
# cloud/durable.py on the main node could not read or write the runs bucket. The S3 gateway endpoint routes S3
# traffic of the subnets' route tables inside the VPC (no NAT gateway, no charge); for W&B (--track) the multi-node
# jobs need private subnets behind a NAT gateway (var.multinode_subnet_ids).
#
# The nodes of a multi-node job exchange gradients every update: they run in one Availability Zone (traffic between
# zones is slower and charged by the GB) and, by default, in a cluster placement group (instances close together in
# that zone). Without multinode_subnet_ids, the multi-node environment gets the subnets of subnet_ids that are in the
# first one's zone.
data "aws_subnet" "given" {
  for_each = toset(concat(var.subnet_ids, var.multinode_subnet_ids))
  id       = each.value
}

resource "aws_placement_group" "multinode" {
  count    = var.multinode_placement_group == "" ? 1 : 0
  name     = "${var.name_prefix}-multinode"
  strategy = "cluster"
}

locals {
  multinode_zone = data.aws_subnet.given[var.subnet_ids[0]].availability_zone
  multinode_subnet_ids = length(var.multinode_subnet_ids) > 0 ? var.multinode_subnet_ids : [
    for s in var.subnet_ids : s if data.aws_subnet.given[s].availability_zone == local.multinode_zone
  ]
  multinode_zones           = distinct([for s in local.multinode_subnet_ids : data.aws_subnet.given[s].availability_zone])
  multinode_placement_group = var.multinode_placement_group == "" ? aws_placement_group.multinode[0].name : (var.multinode_placement_group == "none" ? null : var.multinode_placement_group)
  endpoint_subnet_ids       = var.s3_gateway_endpoint ? distinct(concat(var.subnet_ids, local.multinode_subnet_ids)) : []
}

# The route table of each subnet: the one associated with it, else the VPC's main route table.
data "aws_route_tables" "subnet" {
  for_each = toset(local.endpoint_subnet_ids)
  vpc_id   = var.vpc_id
  filter {
    name   = "association.subnet-id"
    values = [each.value]
  }
}

data "aws_route_tables" "main" {
  count  = var.s3_gateway_endpoint ? 1 : 0
  vpc_id = var.vpc_id
  filter {
    name   = "association.main"
    values = ["true"]
  }
}

resource "aws_vpc_endpoint" "s3" {
  count             = var.s3_gateway_endpoint ? 1 : 0
  vpc_id            = var.vpc_id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids = sort(distinct(flatten([
    for s in local.endpoint_subnet_ids : length(data.aws_route_tables.subnet[s].ids) > 0 ? data.aws_route_tables.subnet[s].ids : data.aws_route_tables.main[0].ids
  ])))
  tags = { Name = "${var.name_prefix}-s3" }
}
