assert(tonumber(ARGV[3]) >= 0,"cost must be at least 0")
local ttl = redis.call('pttl',KEYS[1])
if ttl < 0 then
redis.call('set',KEYS[1],ARGV[3],'EX',ARGV[2])
return {ARGV[3],ARGV[2] * 1000}
end
return {redis.call('incrby',KEYS[1],ARGV[3]),ttl}
