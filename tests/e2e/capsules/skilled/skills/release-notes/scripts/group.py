import sys

for line in sorted(sys.stdin):
    print(line.rstrip())
